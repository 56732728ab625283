package claims

import (
	"context"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

var _ instanceai.InstanceRegistry = (*Table)(nil)

// RegisterInstance implements instanceai.InstanceRegistry.
func (t *Table) RegisterInstance(ctx context.Context, inst instanceai.Instance, ttl time.Duration) ([]instanceai.Instance, error) {
	exp, expArg := t.d.Expiry(ttl)
	now, nowArg := t.d.Now()
	_, err := t.w.ExecContext(ctx, t.q(
		`INSERT INTO instances (id, bus, host, pid, started_at, lease_expires) VALUES (?, ?, ?, ?, `+now+`, `+exp+`)
		 ON CONFLICT (id) DO UPDATE SET bus = excluded.bus, host = excluded.host, pid = excluded.pid,
		     started_at = excluded.started_at, lease_expires = excluded.lease_expires`),
		append(append([]any{inst.ID, inst.Bus, inst.Host, inst.PID}, nowArg...), expArg)...)
	if err != nil {
		return nil, storeerr.Errorf("%s: register instance %q: %w", t.d.Name, inst.ID, err)
	}
	return t.liveInstances(ctx, inst.ID)
}

// LiveInstances implements instanceai.InstanceRegistry.
func (t *Table) LiveInstances(ctx context.Context) ([]instanceai.Instance, error) {
	return t.liveInstances(ctx, "")
}

// liveInstances lists the instances whose lease has not run out but the
// one named except, oldest first.
func (t *Table) liveInstances(ctx context.Context, except string) ([]instanceai.Instance, error) {
	now, nowArg := t.d.Now()
	rows, err := t.r.QueryContext(ctx, t.q(`SELECT id, bus, host, pid, started_at, lease_expires FROM instances
		WHERE id <> ? AND lease_expires >= `+now+` ORDER BY started_at`), append([]any{except}, nowArg...)...)
	if err != nil {
		return nil, storeerr.Errorf("%s: list instances: %w", t.d.Name, err)
	}
	defer rows.Close()
	var out []instanceai.Instance
	for rows.Next() {
		var o instanceai.Instance
		var started, lease any
		if err := rows.Scan(&o.ID, &o.Bus, &o.Host, &o.PID, &started, &lease); err != nil {
			return nil, storeerr.Errorf("%s: list instances: %w", t.d.Name, err)
		}
		if o.StartedAt, err = leaseTime(started); err == nil {
			o.LeaseExpires, err = leaseTime(lease)
		}
		if err != nil {
			return nil, storeerr.Errorf("%s: list instances: %w", t.d.Name, err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Errorf("%s: list instances: %w", t.d.Name, err)
	}
	return out, nil
}

// RenewInstance implements instanceai.InstanceRegistry.
func (t *Table) RenewInstance(ctx context.Context, id string, ttl time.Duration) error {
	exp, expArg := t.d.Expiry(ttl)
	_, err := t.w.ExecContext(ctx, t.q(`UPDATE instances SET lease_expires = `+exp+` WHERE id = ?`), expArg, id)
	if err != nil {
		return storeerr.Errorf("%s: renew instance %q: %w", t.d.Name, id, err)
	}
	return nil
}

// RemoveInstance implements instanceai.InstanceRegistry.
func (t *Table) RemoveInstance(ctx context.Context, id string) error {
	if _, err := t.w.ExecContext(ctx, t.q(`DELETE FROM instances WHERE id = ?`), id); err != nil {
		return storeerr.Errorf("%s: remove instance %q: %w", t.d.Name, id, err)
	}
	return nil
}
