"""Prints torchrun's variables as a worker sees them, then checks MASTER_PORT is held: a plain
bind to it fails, a bind with SO_REUSEADDR (as rank 0's TCPStore does) listens on it."""
import errno
import os
import socket

names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
         "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
         "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS"]
print("env " + " ".join(f"{n}={os.environ.get(n, '-')}" for n in names), flush=True)
if os.environ["RANK"] == "0":
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    plain = socket.socket()
    try:
        plain.bind((addr, port))
        print("port free to anyone", flush=True)
    except OSError as e:
        print("port held" if e.errno == errno.EADDRINUSE else f"bind failed: {e}", flush=True)
    store = socket.socket()
    store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    store.bind((addr, port))
    store.listen(1)
    print("store listens", flush=True)
