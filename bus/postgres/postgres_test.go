package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"

	_ "github.com/lib/pq"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/bus/postgres"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/testpg"
)

func TestContract(t *testing.T) {
	dsn := testpg.BaseDSN(t)
	bustest.Run(t, func(t *testing.T) (instanceai.Bus, instanceai.Bus) {
		var r [6]byte
		_, _ = rand.Read(r[:])
		channel := "test_" + hex.EncodeToString(r[:])
		var out [2]instanceai.Bus
		for i := range out {
			b, err := postgres.Open(context.Background(), dsn, channel)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			out[i] = b
		}
		return out[0], out[1]
	}, func(t *testing.T, _ instanceai.Bus) {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'threadline-bus-listen'`); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBadChannel(t *testing.T) {
	if _, err := postgres.Open(context.Background(), "postgres://x@127.0.0.1:1/x", "bad-name"); err == nil {
		t.Fatal("a channel with a dash was accepted")
	}
}
