package postgres

import (
	"context"
	"fmt"
)

// Identity implements instanceai.BusIdentifier: the database the
// notifications travel in (the server's system identifier when the role
// may read it, and the database's name) and the channel.
func (b *Bus) Identity(ctx context.Context) (string, error) {
	var db string
	if err := b.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return "", fmt.Errorf("postgres bus: %w", err)
	}
	var system string
	// pg_control_system() needs pg_monitor or more; without it, the
	// database's name has to do.
	if err := b.pool.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&system); err == nil {
		db = system + "/" + db
	}
	return fmt.Sprintf("postgres LISTEN/NOTIFY (database %s) channel %s", db, b.channel), nil
}
