"""What the service tells its operator: metrics, logs, reward health, hacking alarms,
shadow scoring."""
