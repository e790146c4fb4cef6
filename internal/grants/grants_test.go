package grants

import (
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

func TestErrorNamesEachGrant(t *testing.T) {
	sel := Grant{Privilege: "SELECT", On: "`d`.*", Why: "to read it"}
	ins := Grant{Privilege: "INSERT", On: "`d`.*", Why: "to read it"}
	create := Grant{Privilege: "CREATE", On: "`d`.*", Why: "to create tables"}
	other := Grant{Privilege: "SELECT", On: "`e`.`t`", Why: "to read it"}
	for _, c := range []struct {
		name    string
		missing []Grant
		want    string
	}{
		{"one", []Grant{sel},
			"target user 'u'@'%' lacks the SELECT privilege on `d`.*, which rowlift needs to read it: run GRANT SELECT ON `d`.* TO 'u'@'%'"},
		{"same object and purpose: one GRANT", []Grant{sel, ins},
			"target user 'u'@'%' lacks the SELECT, INSERT privileges on `d`.*, which rowlift needs to read it: run GRANT SELECT, INSERT ON `d`.* TO 'u'@'%'"},
		{"another purpose", []Grant{sel, create},
			"target user 'u'@'%' lacks the SELECT privilege on `d`.*, which rowlift needs to read it: run GRANT SELECT ON `d`.* TO 'u'@'%'; " +
				"target user 'u'@'%' lacks the CREATE privilege on `d`.*, which rowlift needs to create tables: run GRANT CREATE ON `d`.* TO 'u'@'%'"},
		{"another object", []Grant{sel, other},
			"target user 'u'@'%' lacks the SELECT privilege on `d`.*, which rowlift needs to read it: run GRANT SELECT ON `d`.* TO 'u'@'%'; " +
				"target user 'u'@'%' lacks the SELECT privilege on `e`.`t`, which rowlift needs to read it: run GRANT SELECT ON `e`.`t` TO 'u'@'%'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, (&Error{Role: "target", Account: "'u'@'%'", Missing: c.missing}).Error())
		})
	}
}

func TestDenied(t *testing.T) {
	for number, want := range map[uint16]bool{1044: true, 1142: true, 1143: true, 1227: true, 1045: false, 1146: false, 1060: false} {
		require.Equal(t, want, Denied(&mysql.MySQLError{Number: number}), "%d", number)
	}
	require.False(t, Denied(mysql.ErrInvalidConn))
}
