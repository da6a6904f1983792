"""The routes, a folder per family (scoring, judging, code, peers, info, admin): each
``routes.py`` turns wire shapes into a call of its ``usecases.py`` and the answer back;
``_usecase.py`` is what every use case does (limits, admission, the served model, the
plan run, reward health), once."""
