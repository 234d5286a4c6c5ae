package etcdembed

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// capLeaseTTL refuses lease grants of more than maxTTL seconds, from any
// user. etcd lets every authenticated user grant leases (no permission
// covers them) of up to about 285 years, and has no setting that bounds
// them; the platform's leases live seconds (members, agents'
// registrations), so a long one is a client that means to keep etcd's
// memory and keys: refused, it cannot pile up leases that outlive it.
func capLeaseTTL(maxTTL int64) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if g, ok := req.(*pb.LeaseGrantRequest); ok && g.TTL > maxTTL {
			return nil, status.Errorf(codes.InvalidArgument, "etcdembed: lease TTL %d s is above this platform's cap of %d s", g.TTL, maxTTL)
		}
		return handler(ctx, req)
	}
}
