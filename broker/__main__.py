"""`python -m broker` is the `magnetar` command (same click group, same name in messages)."""

from broker.cli import main

if __name__ == "__main__":
    main(prog_name="magnetar")
