"""Agents as the Python test drivers of multi-agent jobs start them: one `ddprun` process each, its
stderr kept in a file of the test's work directory so that a failure can show it whole."""
import os
import subprocess


class Agent:
    """One agent: `command` run with the test's environment plus AGENT_NAME (the workers stamp it),
    LOGLEVEL=INFO and `extra_env`; stdout dropped, stderr in WORK/NAME.err."""

    def __init__(self, name, command, work, extra_env):
        self.name = name
        self.err_path = os.path.join(work, f"{name}.err")
        self.err = open(self.err_path, "w")
        env = dict(os.environ, AGENT_NAME=name, LOGLEVEL="INFO", **extra_env)
        print(f"$ {name}: {' '.join(command)}")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self.err,
                                        env=env)

    def stderr(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()
