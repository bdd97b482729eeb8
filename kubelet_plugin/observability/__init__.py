"""What the node daemon shows: the metrics endpoint, scrape-time metrics, usage in claim status, timed MIG
operations."""
