# ruff: noqa: T201  (an analysis script: printing its summary is the point)
"""An example of untrusted analysis code, run by CI through `console-bridge run`.

It uses only the standard library and duckdb, prints a summary, and writes nothing outside
its private TMPDIR (the only place the read-only sandbox lets it write). Whatever it tries,
it has no network and cannot change the checkout.
"""

import csv
import os
import random
import tempfile

import duckdb

# 1. Make a small, reproducible data set: daily orders for three regions.
rng = random.Random(20261129)
regions = ["north", "south", "west"]
rows = []
for day in range(1, 31):
    for region in regions:
        orders = rng.randint(20, 60) + (15 if region == "west" and day > 15 else 0)
        revenue = round(orders * rng.uniform(18.0, 24.0), 2)
        rows.append({"day": day, "region": region, "orders": orders, "revenue": revenue})

# 2. Write it as CSV into the private TMPDIR (the sandbox's only writable place).
scratch = tempfile.mkdtemp(prefix="analysis-")
csv_path = os.path.join(scratch, "orders.csv")
with open(csv_path, "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=["day", "region", "orders", "revenue"])
    writer.writeheader()
    writer.writerows(rows)

# 3. Query it with duckdb (in memory).
con = duckdb.connect()
con.execute("create table orders as select * from read_csv_auto(?)", [csv_path])
by_region = con.execute(
    """
    select region,
           sum(orders) as orders,
           round(sum(revenue), 2) as revenue,
           round(avg(orders) filter (where day > 15) - avg(orders) filter (where day <= 15), 1) as trend
    from orders
    group by region
    order by revenue desc
    """
).fetchall()
total_orders, total_revenue = con.execute("select sum(orders), round(sum(revenue), 2) from orders").fetchone()

# 4. The summary.
print(f"Orders summary: {len(rows)} rows, 30 days, {len(regions)} regions")
print(f"{'region':<8} {'orders':>7} {'revenue':>11} {'trend':>7}")
for region, orders, revenue, trend in by_region:
    print(f"{region:<8} {orders:>7} {revenue:>11.2f} {trend:>+7.1f}")
print(f"{'total':<8} {total_orders:>7} {total_revenue:>11.2f}")
top = by_region[0][0]
print(f"Top region by revenue: {top}")
