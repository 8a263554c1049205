"""Frame conversion: deciding what to do with a frame the C hook hands over, and doing it."""
