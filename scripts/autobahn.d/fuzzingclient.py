# Python 2 (autobahntestsuite 0.8.2): the Autobahn fuzzing client (`wstest -m fuzzingclient`)
# with a barrier between cases, for wsbridged's WebSocket face. Through the face every upstream
# message goes to every app, and the upstream echoes what a case sends: an echo still on its way
# when a case's connection ends would reach the next case. So before each case a marker goes
# through the face on a connection of its own, and the case starts once the marker came back:
# the upstream echoes in order, so everything sent before it has been delivered by then.
# Usage: fuzzingclient.py SPEC.json
import json
import sys

from twisted.internet import reactor
from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol, connectWS
from autobahntestsuite.fuzzing import FuzzingClientFactory


class Barrier(WebSocketClientProtocol):
    def onOpen(self):
        self.factory.ready(self)

    def onMessage(self, payload, isBinary):
        self.factory.received(payload)


class BarrierFactory(WebSocketClientFactory):
    protocol = Barrier

    def __init__(self, url, then):
        WebSocketClientFactory.__init__(self, url=url)
        self.connection = None
        self.waiting = None
        self.count = 0
        self.then = then

    def ready(self, connection):
        self.connection = connection
        self.then()

    def wait(self, then):
        self.count += 1
        self.waiting = ("barrier %d" % self.count, then)
        self.connection.sendMessage(self.waiting[0].encode("utf8"))

    def received(self, payload):
        if self.waiting and payload == self.waiting[0]:
            then = self.waiting[1]
            self.waiting = None
            then()


class BarrierFuzzingClientFactory(FuzzingClientFactory):
    def __init__(self, spec, barrier):
        self.barrier = barrier
        FuzzingClientFactory.__init__(self, spec)

    def clientConnectionLost(self, connector, reason):
        if self.nextCase():
            self.barrier.wait(connector.connect)
        else:
            self.createReports()
            reactor.stop()


spec = json.load(open(sys.argv[1]))
url = spec["servers"][0]["url"]
state = {}
barrier = BarrierFactory(url, lambda: state.setdefault("fuzzing", BarrierFuzzingClientFactory(spec, barrier)))
connectWS(barrier)
reactor.run()
