"""A quiet console: TensorFlow's native log lines kept off stderr, progress bars only on a terminal.

TensorFlow 2.21 writes some lines from C++ through absl before any Python setting can reach them
(``WARNING: All log messages before absl::InitializeLog() ...``, ``I0000 ... oneDNN custom
operations are on``, ``E0000 ... oneDNN supports DT_BOOL only ...``): ``TF_CPP_MIN_LOG_LEVEL``
does not silence them. :func:`filter_native_log` therefore points file descriptor 2 at a pipe
read by a small filter process that drops those lines and passes everything else on (a fatal
``F`` line included), while Python's own ``sys.stderr`` (tracebacks, warnings, progress bars)
keeps writing to the real stderr. The filter is a separate process so that nothing written
before a crash is lost: it drains the pipe after its parent has gone.

    >>> filter_native_log()            # a script's first step, before TensorFlow loads
    >>> show_progress()                # True on a terminal, False in a file or pipe
"""
import atexit
import os
import re
import subprocess
import sys

# absl's prefix ('I0000 00:00:1795619637.205835    7212 port.cc:153] ...'), TensorFlow's older
# one ('2026-11-25 15:22:01.123456: I tensorflow/...'), and absl's notice before InitializeLog.
NATIVE_LOG_LINE = re.compile(
    rb'([IWE]\d{4} [\d:.]+\s+\d+ \S+:\d+\] '
    rb'|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] '
    rb'|WARNING: All log messages before absl::InitializeLog\(\) is called)')

_filter = None     # the filter process, once installed


def filter_native_log():
    """Route native writes to stderr through a filter that drops TensorFlow's log lines.

    Idempotent; does nothing where stderr has no file descriptor. Call it before TensorFlow loads.
    """
    global _filter
    if _filter is not None:
        return
    try:
        real_stderr = os.dup(2)
    except OSError:
        return
    sys.stderr.flush()
    _filter = subprocess.Popen([sys.executable, '-S', os.path.abspath(__file__)],
                               stdin=subprocess.PIPE, stdout=real_stderr,
                               stderr=subprocess.DEVNULL, close_fds=True,
                               start_new_session=True)   # Ctrl-C stops its parent only
    os.dup2(_filter.stdin.fileno(), 2)               # C++ writes go to the filter ...
    _filter.stdin.close()
    sys.stderr = open(real_stderr, 'w', buffering=1, encoding=sys.stderr.encoding or 'utf-8',
                      errors='backslashreplace')     # ... Python's straight to the terminal
    atexit.register(_drain, real_stderr)


def _drain(real_stderr):
    """At exit: close the pipe (fd 2 back to the real stderr) and let the filter pass on what it
    still holds before the shell prompt returns."""
    try:
        os.dup2(real_stderr, 2)
    except OSError:     # its file (sys.stderr) was closed, as a test runner's capture can do
        return
    try:
        _filter.wait(timeout=5)
    except subprocess.TimeoutExpired:     # a child process of ours still holds the pipe
        pass


def drop_native_log(lines, out):
    """Copy ``lines`` (bytes) to ``out``, leaving out TensorFlow's native log lines."""
    for line in lines:
        if not NATIVE_LOG_LINE.match(line):
            out.write(line)
            out.flush()


def show_progress():
    """True when progress bars belong on stderr: it is a terminal (in a file or pipe the scripts
    print one line per epoch instead of carriage-return updates)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


if __name__ == '__main__':        # the filter process of filter_native_log
    drop_native_log(sys.stdin.buffer, sys.stdout.buffer)
