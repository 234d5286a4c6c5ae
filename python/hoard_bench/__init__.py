"""hoard's benchmark helpers: the boto3 client of `hoard bench access`, the
cost model and the report of `hoard bench all`."""
