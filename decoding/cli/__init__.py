"""The `python -m decoding` command line: main.py (the subcommands), args.py (argument checks every CLI shares),
habits.py (prompts, --chat, --stop, --stream, timing lines), method_flags.py (the method flags, from the specs)."""
