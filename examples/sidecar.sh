# examples/sidecar.sh: ttft as a sidecar on a Unix socket that only this user can open (0600).
SOCK=${1:-/tmp/ttft.sock}
ttft serve dummy:tiny --uds "$SOCK" &
until curl -sf -o /dev/null --unix-socket "$SOCK" http://ttft/health; do sleep 1; done
curl -s --unix-socket "$SOCK" http://ttft/v1/completions -H 'content-type: application/json' \
    -d '{"prompt": "The capital of France is", "max_tokens": 16}'
echo
kill $! && wait $!  # SIGTERM: in-flight requests finish, then the socket file is removed
