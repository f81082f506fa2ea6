"""The governed connection: allowlists, owner, busy slot, deadlines, policy hooks; and its blocking twin."""
