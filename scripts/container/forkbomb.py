"""A fork bomb that catches its own EAGAIN (scripts/ci-container.sh, run with --processes 64): the
bridge must report the file as stopped at the processes limit, not as a success."""

import os


def fork_bomb():
    children = []
    try:
        for _ in range(500):
            pid = os.fork()
            if pid == 0:
                import time

                time.sleep(60)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror} after {len(children)} forks (--processes 64)") from None
    finally:
        for pid in children:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    return f"{len(children)} processes"


print(f"GOT {fork_bomb()}")
