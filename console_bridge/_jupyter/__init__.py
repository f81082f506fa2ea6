"""The Jupyter face of console_bridge: option parsing here (pure); the magics in ``console_bridge.jupyter``."""
