"""Security and failure-mode tests: tenancy, poison records, IAM, hostile input, bursts, fuzz."""
