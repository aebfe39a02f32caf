"""``python -m traceaug`` and the ``traceaug`` script; a signal during imports exits at once, no traceback
(``startup.early``), until ``cli.run`` installs the real handlers."""

from .startup import early  # not `from . import`: that asks the package's __getattr__, which loads modules


def main() -> None:
    early()
    from .cli import run

    run()


if __name__ == "__main__":
    main()
