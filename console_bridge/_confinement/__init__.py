"""Confinement: the supervisor process, limits, deny rules and the registry of live sessions."""
