"""Confinement: what a session's processes can see, what they may consume, and who owns them.

``_host`` detects the host kind once (privileges, user namespaces, cgroup version and delegation,
a systemd manager); ``_view`` turns a session's paths into its read view (a mount plan: pure data);
``_namespaces`` enters the session's own namespaces and applies the plan (the only code that
mounts); ``_plan`` picks each limit's mechanism from the host kind (cgroup v2, a systemd scope,
cgroup v1, rlimits) and ``_cgroups`` creates the groups; ``_supervisor`` owns the session's
process tree; ``_registry`` records every live session and proves an entry is ours; ``_deny`` is
what stays denied inside the view and the start-time probe.
"""
