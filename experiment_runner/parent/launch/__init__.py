"""Launchers: how one experiment's child process is started, watched and killed."""
