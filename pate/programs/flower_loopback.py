"""A Flower deployment in one process: the coordinator's Grid calls every silo's ClientApp in
this process, as `pate silos run` would over a SuperLink and its SuperNodes
(`pate.programs.flower_deploy`), with none of Flower's polling latency. The secure sum is still
Flower's own SecAgg+ workflow and mod (`pate.programs.secure_sum`): only the transport is
replaced, each message deep-copied there and back as a wire would carry it.

Used where every party runs on one machine on purpose: the tests of the release across silos
and `bench/silos.py`. It protects no silo from another (they share a process); a real release
runs each silo on its own host (docs/silos.md).
"""

from __future__ import annotations


def _unused(method: str) -> NotImplementedError:
    """A Grid method the one-round SecAgg+ workflow never calls (it sends with `send_and_receive`)."""
    return NotImplementedError(f"the loopback grid answers send_and_receive only; {method} is not used by "
                               "the one-round workflow")


def loopback_grid(client_app, node_configs, *, answers=None):
    """A Flower Grid in this process: node i+1 is a SuperNode with ``node_configs[i]`` (its node
    config: ``pate_config``, ``silo``, ``slice``) and a state of its own, and each message is
    delivered as a wire would (a deep copy there and back) to ``client_app``; a ClientApp's
    exception comes back as Flower's error reply (its reason ``<class '...'>:<'message'>``).
    ``answers`` {i: k}: node i+1 answers its first k messages only, then is silent (a silo killed
    mid-round: SecAgg+'s timeout passes it over). Sets Flower's task identity for the
    coordinator's messages."""
    import copy
    import types

    from flwr.app import Context, Error, Message, RecordDict
    from flwr.serverapp.grid import Grid
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0

    class Loopback(Grid):
        def __init__(self):
            self.contexts = {i + 1: Context(run_id=1, node_id=i + 1, node_config=dict(c), state=RecordDict(),
                                            run_config={}) for i, c in enumerate(node_configs)}
            self.answered = {n: 0 for n in self.contexts}
            self.limits = {i + 1: k for i, k in (answers or {}).items()}

        @property
        def run(self):
            return types.SimpleNamespace(run_id=1)

        def set_run(self, run_id):
            pass

        def create_message(self, *args, **kwargs):
            raise _unused("create_message")

        def get_node_ids(self):
            return list(self.contexts)

        def get_nodes(self):
            return []

        def push_messages(self, messages):
            raise _unused("push_messages")

        def pull_messages(self, message_ids):
            raise _unused("pull_messages")

        def send_and_receive(self, messages, *, timeout=None):
            replies = []
            for message in messages:
                node = message.metadata.dst_node_id
                if node in self.limits and self.answered[node] >= self.limits[node]:
                    continue  # killed: no reply before the timeout
                self.answered[node] += 1
                TaskIdentity.node_id = node
                sent = copy.deepcopy(message)
                try:
                    reply = client_app(sent, self.contexts[node])
                except Exception as ex:  # as flwr-clientapp replies (flwr.supernode.runtime.run_clientapp)
                    reply = Message(Error(code=2, reason=str(type(ex)) + ":<'" + str(ex) + "'>"), reply_to=sent)
                finally:
                    TaskIdentity.node_id = 0
                replies.append(copy.deepcopy(reply))
            return replies

    return Loopback()


def server_context():
    """A ServerApp's Context for `loopback_grid` (what the SuperLink gives `coordinate`)."""
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
