"""Runs recorded in MLflow: batched, resumable, and surviving a store that goes away.

tracker.py  Tracker (no-op), MLflowTracker (batched log_batch, resume without duplicates, outage buffer)
store.py    ensure_experiment (create once before fanning out), client_for (an existing store only)
tags.py     every tag and key name this project writes and reads
spool.py    sync_file: deliver a run spooled during an outage
"""
