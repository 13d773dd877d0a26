"""What every stage shares: writes a kill cannot tear (`atomic`), a quiet console (`console`), the
scripts' shared flags and one-line user errors (`cli`).
"""
