package streamer

import "testing"

func TestGrantsOnly(t *testing.T) {
	for q, want := range map[string]bool{
		"GRANT SELECT ON `p`.`t` TO 'mover'@'%'":           true,
		"grant lock tables on p.* to mover":                true,
		"REVOKE SELECT ON p.t FROM 'mover'@'127.0.0.1'":    true,
		"  REVOKE ALL PRIVILEGES, GRANT OPTION FROM mover": true,
		"ALTER TABLE t ADD COLUMN grant_id INT":            false,
		"RENAME TABLE t TO _t_frozen":                      false,
		"DROP TABLE grants":                                false,
		"CREATE TABLE revoke_log (id INT PRIMARY KEY)":     false,
		"TRUNCATE TABLE t":                                 false,
	} {
		if got := grantsOnly(q); got != want {
			t.Errorf("grantsOnly(%q) = %v, want %v", q, got, want)
		}
	}
}
