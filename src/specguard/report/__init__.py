"""Presentation: terminal tables and progress. No figure is computed here."""
