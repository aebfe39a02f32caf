"""``python -m traceaug`` and the ``traceaug`` script; a signal during imports exits at once, no traceback
(``startup.early``), until ``cli.run`` installs the real handlers."""

from . import startup


def main() -> None:
    startup.early()
    from .cli import run

    run()


if __name__ == "__main__":
    main()
