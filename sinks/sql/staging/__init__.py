"""The staging commit mode: rows staged per task attempt, moved by the driver in one transaction."""
