"""Example stead apps to copy from, with the fake outside services they call."""
