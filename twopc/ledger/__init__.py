"""The decision ledger: its records and where they are kept (the checkpoint's folder or a table
in the target), the owner epochs and leases that fence other writers, the abort fence's
records, and the driver agent that holds a driver's leases."""
