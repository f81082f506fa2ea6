"""Pure governance: policy decisions, schema pins, description scanning, output caps, audit writer."""
