"""Governance: the gate every governed call passes through (``_gate``) and its pure parts:
policy decisions, schema pins, description scanning, output caps, the audit writer."""
