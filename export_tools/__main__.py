"""`python -m export_tools`: for now, show that the ops library loads and works."""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="export-tools", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo-ops", help="run the op and the class on a small input and print what they give")
    args = parser.parse_args(argv)
    try:
        from . import demo
    except RuntimeError as e:  # the library is missing or does not load
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.command == "demo-ops":
        return demo.demo_ops()
    return 2


if __name__ == "__main__":
    sys.exit(main())
