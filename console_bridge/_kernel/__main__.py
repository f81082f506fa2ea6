"""``python -m console_bridge._kernel -f CONNECTION_FILE [-- %%console options]``: what a kernelspec runs."""

from console_bridge._kernel._kernel import main

main()
