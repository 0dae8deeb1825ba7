"""`python -m bench`: the same as `ttft bench`."""
import sys

from bench.cli import main

sys.exit(main())
