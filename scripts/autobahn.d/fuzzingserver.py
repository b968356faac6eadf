# Python 2 (autobahntestsuite 0.8.2): the Autobahn fuzzing server, listening on loopback only
# (`wstest -m fuzzingserver` listens on every interface). Usage: fuzzingserver.py SPEC.json
import json
import sys

from twisted.internet import reactor
from autobahn.twisted.websocket import listenWS
from autobahntestsuite.fuzzing import FuzzingServerFactory

spec = json.load(open(sys.argv[1]))
factory = FuzzingServerFactory(spec, False)
listenWS(factory, None, interface="127.0.0.1")
print("listening")
sys.stdout.flush()
reactor.run()
