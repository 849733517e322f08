psql -h db -c 'copy t from data.csv'
