"""Load generation: prompt sources, arrival schedules, the streaming client and the run loop."""
