"""Runs recorded in MLflow: batched, resumable, and surviving a store that goes away.

tracker.py  Tracker (no-op), MLflowTracker (batched log_batch, resume without duplicates, outage buffer)
runstore.py RunStore: a run's MLflow calls on plain data (the one place that builds MLflow entities)
agent.py    the same calls made by a process beside the run, which imports MLflow while the run starts
store.py    ensure_experiment (create once before fanning out), client_for (an existing store only)
tags.py     every tag and key name this project writes and reads
spool.py    sync_file: deliver a run spooled during an outage
"""
