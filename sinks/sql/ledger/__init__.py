"""The decision ledger kept in the target database (``twopc_ledger``) and the write's lease."""
