"""``python -m broker.admin_cli``: the ``magnetar-admin`` script."""

from broker.admin_cli import main

main()
