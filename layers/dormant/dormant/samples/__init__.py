"""Sample apps that ship with dormant (``dormant dev`` serves :mod:`.bookings` by default)."""
