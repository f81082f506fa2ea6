"""What tests in several folders share, imported as ``tests.support.<module>`` (never from another
folder's ``conftest``): ``waiting`` (the one bounded wait), ``binaries`` (the mcp-console under
test), ``places`` (the repository's paths and the test MCP servers), ``processes`` (is a process
alive, a process tree)."""
