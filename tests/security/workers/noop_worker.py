"""A worker that only says it ran: a job whose agent should have refused to start shows it did."""
print("worker ran", flush=True)
