"""Gate 4's decision: the check plan, running its A/B matrix, and the GO / NO-GO verdict."""
