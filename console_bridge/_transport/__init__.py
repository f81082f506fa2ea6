"""Transports and process ownership: the stdio child, Streamable HTTP, the JSON-RPC guard."""
