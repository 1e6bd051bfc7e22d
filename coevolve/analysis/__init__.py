"""Analysis of rollouts, pure: pass rates with 95% intervals and pass^k (`stats`), failure composition,
the planning-style fingerprint and its drift, the judge's accuracy (`rollouts`), batch summaries
(`summary`), tau2's metrics and comparability (`tau2`), edit usage (`usage`), the benches' resumable
cells (`cells`)."""
