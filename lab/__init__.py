"""The lab: one-off probes, profilers and A/B scripts that produced a result (`python -m lab.X`,
`python lab/X.py` or `bash lab/X.sh` from the repository root). Not packaged; the packages never
import it (tests/test_layout.py). `lab/runs/` keeps the scripts of single runs, under the path of
the run's results in bench/results/."""
