"""Variable trackers: symbolic stand-ins for the Python values a traced frame manipulates."""
