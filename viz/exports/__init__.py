"""Exports: the steps worth showing (teach: the teaching step and the slide deck's steps) and the animated
GIF rendered from the page in headless Chromium.
"""
