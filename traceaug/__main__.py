"""``python -m traceaug`` and the ``traceaug`` script.

A signal while the command line is still importing ends the process at once, with exit
130 / 143 and no traceback (``startup.early``); ``cli.run`` installs the real handlers.
"""

from . import startup


def main() -> None:
    startup.early()
    from .cli import run

    run()


if __name__ == "__main__":
    main()
