package legacy_test

import (
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/reservation/legacy"
)

// TestStorePoolSize: reservation.redis.pool_size bounds the Redis client's
// connections, 64 by default (go-redis's own default, 10 per GOMAXPROCS,
// made CALLs in shadow mode queue for a connection at 256 clients).
func TestStorePoolSize(t *testing.T) {
	for _, tc := range []struct{ set, want int }{{0, 64}, {7, 7}} {
		st := legacy.NewStore(legacy.Config{Address: "127.0.0.1:1", PoolSize: tc.set}.WithDefaults(time.Hour), nil)
		if got := st.Client().Options().PoolSize; got != tc.want {
			t.Errorf("pool_size %d: the client's PoolSize is %d, want %d", tc.set, got, tc.want)
		}
		st.Close()
	}
}
