"""Orchestration of a run: compare, diagnose and the steps diagnose is made of."""
