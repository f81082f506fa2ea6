"""The file after hostile.py in the same session (scripts/ci-container.sh): the session still works."""

total = sum(range(10))
print(f"after: the session still works ({total})")
