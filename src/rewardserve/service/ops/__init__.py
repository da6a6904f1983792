"""What an operator does to a served model: sleep and wake, load a version beside, canary,
weights, memory."""
