"""Signals around the C++ client's waits, for every part of the package."""

import contextlib
import signal
import threading


@contextlib.contextmanager
def interruptible():
    """Lets Ctrl-C end the process while the C++ client waits.

    Python turns SIGINT into KeyboardInterrupt only between bytecodes, so a
    worker blocked in a step (up to step_timeout_s) would ignore it. While
    the client waits, SIGINT has its default action instead, as it has for
    lockstep_worker; a handler the script installed itself is left alone.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
