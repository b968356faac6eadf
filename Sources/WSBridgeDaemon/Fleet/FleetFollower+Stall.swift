import Logging
import NIOCore
import WSBridgeCore
import WSBridgeProtocol

/// A follower whose stream stops advancing says so (docs/fleet.md): in `status`
/// (`fleet.stalled_seconds`) once no message came for `stallAfter` while it follows, and in the
/// log once, then again when the stream moves on. It cannot tell a bridge that publishes nothing
/// from a quiet feed; the bridges' `status` can.
extension FleetFollower {
    static let stallAfter: TimeAmount = .seconds(10)

    /// Seconds since the stream last advanced, from `stallAfter` on (nil before, or not following).
    var stalledSeconds: Int? {
        guard self.phase == .open, !self.stopped, self.received == self.advanced.received else { return nil }
        let quiet = NIODeadline.now() - self.advanced.at
        return quiet >= Self.stallAfter ? Int(quiet.nanoseconds / 1_000_000_000) : nil
    }

    /// Once a second.
    func watchStall() {
        if self.received != self.advanced.received || self.phase != .open {
            if self.stallTold, self.received != self.advanced.received {
                self.logger.notice("fleet: the stream \(self.fleet.stream) advances again (stream seq \(self.streamSeq ?? self.fanout.position.seq))")
            }
            self.advanced = (self.received, NIODeadline.now())
            self.stallTold = false
            return
        }
        guard !self.stallTold, let seconds = self.stalledSeconds else { return }
        self.stallTold = true
        self.logger.warning(
            "fleet: the stream \(self.fleet.stream) has not advanced for \(seconds) s (last stream seq \(self.streamSeq ?? self.fanout.position.seq)): its bridge publishes nothing (wsbridgectl status on the bridges: fleet state, lease, last_error), or the feed is quiet"
        )
    }
}
